"""A ClientApp that runs no PyTorch: a NumPy least-squares fit, answered as a metric."""

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    rng = np.random.default_rng(int(context.node_config["partition-id"]))
    a = rng.standard_normal((400, 200))
    b = rng.standard_normal(400)
    x, *_ = np.linalg.lstsq(a, b, rcond=None)
    return Message(RecordDict({"metrics": MetricRecord({"residual": float(np.linalg.norm(a @ x - b))})}), reply_to=msg)
