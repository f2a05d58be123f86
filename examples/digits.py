"""Train the digits classifier with the Python API (what `surge fit` does with no arguments)."""

import surge
from surge.examples.digits import DigitsClassifier, DigitsDataModule

if __name__ == "__main__":
    surge.seed_everything(0)
    trainer = surge.Trainer(max_epochs=10)
    trainer.fit(DigitsClassifier(max_epochs=10), datamodule=DigitsDataModule())
    print(f"validation accuracy: {float(trainer.callback_metrics['val_acc']):.4f}")
    print(f"run directory: {trainer.run_dir}")
