"""Front end: simhpu's own op_plugin_functions.yaml (load: the entries; stubs: `stub:` entries;
reference: `reference:` and `samples:`), validated into the model."""
