"""What a submodel costs: parameter, FLOP and memory footprints, the per-operator roofline, device measurement."""
