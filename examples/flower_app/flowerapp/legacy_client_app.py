"""flowerapp: the same client in Flower's earlier layout, a NumPyClient made by ``client_fn``."""

from flwr.client import ClientApp, NumPyClient
from flwr.common import Context

from flowerapp.task import Net, get_weights, load_data, seed_for, set_weights, test, train


class FlowerClient(NumPyClient):
    def __init__(self, partition_id: int, num_partitions: int, context: Context) -> None:
        self.partition_id = partition_id
        self.config = context.run_config
        self.seed = int(self.config["seed"])
        self.net = Net()
        self.trainloader, self.testloader = load_data(
            partition_id, num_partitions, int(self.config["batch-size"]), self.seed
        )

    def fit(self, parameters, config):
        seed_for(self.seed, self.partition_id, int(config["server-round"]))
        set_weights(self.net, parameters)
        loss = train(self.net, self.trainloader, int(self.config["local-epochs"]), float(config["lr"]))
        return get_weights(self.net), len(self.trainloader.dataset), {"train_loss": loss}

    def evaluate(self, parameters, config):
        set_weights(self.net, parameters)
        loss, accuracy = test(self.net, self.testloader)
        return loss, len(self.testloader.dataset), {"accuracy": accuracy}


def client_fn(context: Context):
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    return FlowerClient(partition_id, num_partitions, context).to_client()


app = ClientApp(client_fn=client_fn)
