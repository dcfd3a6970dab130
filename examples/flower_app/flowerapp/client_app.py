"""flowerapp: the ClientApp (Message API)."""

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flowerapp.task import Net, load_data, seed_for, test, train

app = ClientApp()


def _setup(msg: Message, context: Context):
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    seed = int(context.run_config["seed"])
    seed_for(seed, partition_id, int(msg.content["config"]["server-round"]))
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    loaders = load_data(partition_id, num_partitions, int(context.run_config["batch-size"]), seed)
    return net, loaders


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    net, (trainloader, _) = _setup(msg, context)
    loss = train(net, trainloader, int(context.run_config["local-epochs"]), float(msg.content["config"]["lr"]))
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(trainloader.dataset)})
    content = RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    net, (_, testloader) = _setup(msg, context)
    loss, acc = test(net, testloader)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": len(testloader.dataset)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
