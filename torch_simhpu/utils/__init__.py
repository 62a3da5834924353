"""Tools for building operator packages against torch_simhpu."""
