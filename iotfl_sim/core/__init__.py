"""What every layer of the simulator (and ``analysis/``) may import: the error types that cross layers
(``errors``), the reader of JSON files the tool wrote back (``safe_json``) and the names the scenario accepts
and the code dispatches on (``catalog``). This package imports nothing else of ``iotfl_sim`` and no PyTorch
(an import-linter contract in pyproject.toml)."""
