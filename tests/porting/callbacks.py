"""Lightning's callbacks as its documentation uses them: ``EarlyStopping`` and ``ModelCheckpoint`` passed in
``Trainer(callbacks=[...])``, the best checkpoint's path read from the callback, ``trainer.test(ckpt_path=
"best")``, and a ``StepLR`` scheduler returned as ``[optimizers], [schedulers]``. Surge takes these objects in
``plugins=[...]``: the one change beyond imports that docs/porting.md lists (``tests/test_porting.py`` checks
both the clear error of the unchanged call and the run after that change).
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(L.LightningModule):
    def __init__(self, learning_rate: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(16, 2)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return [optimizer], [scheduler]


def two_classes(n, seed):
    generator = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, 16, generator=generator) + 0.5 * (2 * y[:, None] - 1)
    return TensorDataset(x, y)


def main(root_dir, max_epochs=30):
    L.seed_everything(7)
    train = DataLoader(two_classes(128, seed=1), batch_size=32, shuffle=True)
    val = DataLoader(two_classes(64, seed=2), batch_size=32)
    test = DataLoader(two_classes(64, seed=3), batch_size=32)

    early_stopping = EarlyStopping(monitor="val_loss", mode="min", patience=2, min_delta=0.01)
    checkpoint_callback = ModelCheckpoint(dirpath=root_dir + "/checkpoints", save_top_k=2, monitor="val_loss")
    trainer = L.Trainer(
        max_epochs=max_epochs, default_root_dir=root_dir, callbacks=[early_stopping, checkpoint_callback]
    )
    model = LitModel()
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    epochs_trained, final_val_acc = trainer.current_epoch, trainer.callback_metrics["val_acc"].item()
    tested = trainer.test(dataloaders=test, ckpt_path="best")
    return {
        "model": model,
        "trainer": trainer,
        "early_stopping": early_stopping,
        "epochs_trained": epochs_trained,
        "final_val_acc": final_val_acc,
        "best_model_path": checkpoint_callback.best_model_path,
        "tested": tested,
    }
