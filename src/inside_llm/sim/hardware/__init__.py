"""GPUs and number formats (hardware), and the catalog of GPUs, models, nodes and references (catalog)."""
