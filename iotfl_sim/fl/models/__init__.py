"""Model families: the builder registry (``build``), each family's module, early exits, reassembly."""
