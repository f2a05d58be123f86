from itertools import pairwise

from torch import nn


class SimpleDenseNet(nn.Module):
    """Three hidden layers with batch norm and ReLU, then a linear output."""

    def __init__(
        self,
        input_size: int = 784,
        lin1_size: int = 256,
        lin2_size: int = 256,
        lin3_size: int = 256,
        output_size: int = 10,
    ) -> None:
        super().__init__()
        sizes = [input_size, lin1_size, lin2_size, lin3_size]
        layers: list[nn.Module] = []
        for fan_in, fan_out in pairwise(sizes):
            layers += [nn.Linear(fan_in, fan_out), nn.BatchNorm1d(fan_out), nn.ReLU()]
        self.model = nn.Sequential(*layers, nn.Linear(lin3_size, output_size))

    def forward(self, x):
        batch_size = x.size(0)
        return self.model(x.view(batch_size, -1))  # (batch, 1, 8, 8) -> (batch, 64)
