"""Transfer learning with a ``BaseFinetuning`` callback, as the API reference of
``lightning.pytorch.callbacks.BaseFinetuning`` shows it
(https://lightning.ai/docs/pytorch/stable/api/lightning.pytorch.callbacks.BaseFinetuning.html), with the model and
schedule of Lightning's ``examples/pytorch/domain_templates/computer_vision_fine_tuning.py``
(https://github.com/Lightning-AI/pytorch-lightning/blob/master/examples/pytorch/domain_templates/computer_vision_fine_tuning.py).

Kept: ``FeatureExtractorFreezeUnfreeze(BaseFinetuning)`` with ``__init__(unfreeze_at_epoch)`` calling
``super().__init__()``, ``freeze_before_training(pl_module)`` calling ``self.freeze(pl_module.feature_extractor)``
and ``finetune_function(pl_module, current_epoch, optimizer)`` calling ``self.unfreeze_and_add_param_group(modules=
pl_module.feature_extractor, optimizer=optimizer, train_bn=True)`` at that epoch; a module with a
``feature_extractor`` (batch norm included) and a head whose ``configure_optimizers`` gives Adam only the parameters
that ``requires_grad`` and a ``MultiStepLR``; ``self.log(..., prog_bar=True)`` of loss and accuracy. A small
network stands in for the example's pre-trained ResNet-50, two-class random blobs for its cats and dogs; unfreezing
at epoch 1 of 3 where the reference says 10.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import BaseFinetuning
from torch import nn, optim
from torch.optim.lr_scheduler import MultiStepLR
from torch.utils.data import DataLoader, TensorDataset


class FeatureExtractorFreezeUnfreeze(BaseFinetuning):
    def __init__(self, unfreeze_at_epoch=10):
        super().__init__()
        self._unfreeze_at_epoch = unfreeze_at_epoch

    def freeze_before_training(self, pl_module):
        # freeze any module you want: here the feature extractor
        self.freeze(pl_module.feature_extractor)

    def finetune_function(self, pl_module, current_epoch, optimizer):
        # at that epoch the feature extractor starts training, in a parameter group of its own
        if current_epoch == self._unfreeze_at_epoch:
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor,
                optimizer=optimizer,
                train_bn=True,
            )


class TransferLearningModel(L.LightningModule):
    def __init__(self, milestones=(1, 2), lr=1e-3, lr_scheduler_gamma=1e-1):
        super().__init__()
        self.save_hyperparameters()
        self.milestones = milestones
        self.lr = lr
        self.lr_scheduler_gamma = lr_scheduler_gamma
        self.feature_extractor = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 16))
        self.fc = nn.Sequential(nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.fc(self.feature_extractor(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_logits = self(x).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(y_logits, y)
        acc = ((y_logits > 0).float() == y).float().mean()
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", acc, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_logits = self(x).squeeze(1)
        self.log("val_loss", F.binary_cross_entropy_with_logits(y_logits, y), prog_bar=True)
        self.log("val_acc", ((y_logits > 0).float() == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        parameters = list(self.parameters())
        trainable_parameters = list(filter(lambda p: p.requires_grad, parameters))
        optimizer = optim.Adam(trainable_parameters, lr=self.lr)
        scheduler = MultiStepLR(optimizer, milestones=self.milestones, gamma=self.lr_scheduler_gamma)
        return [optimizer], [scheduler]


def blobs(n, seed):
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(2, (n,), generator=generator).float()
    x = torch.randn(n, 8, generator=generator) + (2 * y - 1).unsqueeze(1)
    return TensorDataset(x, y)


def main(root_dir, max_epochs=3):
    L.seed_everything(42)
    model = TransferLearningModel()
    finetuning = FeatureExtractorFreezeUnfreeze(unfreeze_at_epoch=1)
    trainer = L.Trainer(max_epochs=max_epochs, callbacks=[finetuning], default_root_dir=root_dir)
    trainer.fit(
        model,
        train_dataloaders=DataLoader(blobs(256, seed=1), batch_size=32, shuffle=True),
        val_dataloaders=DataLoader(blobs(64, seed=2), batch_size=32),
    )
    optimizer = trainer.optimizers[0]
    return {
        "model": model,
        "trainer": trainer,
        "fit_metrics": dict(trainer.callback_metrics),
        "param_groups": [(len(g["params"]), g["lr"]) for g in optimizer.param_groups],
        "trainable": all(p.requires_grad for p in model.parameters()),
    }
