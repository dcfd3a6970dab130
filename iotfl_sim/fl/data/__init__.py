"""Datasets: loaders of the official file layouts, client partitions, downloads."""
