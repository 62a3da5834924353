"""Front end: op-plugin's own YAML dialect (dialect: reading and selecting entries; check: its
output rules held to ATen; translate: entries into the model). Its rule language, read by this front
end and rendered by the back ends, is the model's (model/op_plugin_rules.py, op_plugin_rules_cpp.py)."""
