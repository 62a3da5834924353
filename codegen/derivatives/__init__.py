"""Front end: derivatives.yaml (loader: backward formulas, read with torchgen's loader and checked
against the model's operators)."""
