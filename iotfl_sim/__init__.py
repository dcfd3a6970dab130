"""iotfl-sim: discrete-event simulation of federated learning on heterogeneous IoT fleets."""
__version__ = "0.1.0"
