"""flowerapp: a Flower / PyTorch app (the layout of Flower's PyTorch template, Message API)."""
