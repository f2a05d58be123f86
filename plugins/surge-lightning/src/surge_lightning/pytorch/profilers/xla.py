"""``lightning.pytorch.profilers.xla``: refused by Surge, with its submodules (docs/porting.md, "The inventory", says why and what to
use): importing it raises that."""

from surge_lightning.inventory import refuse_module

refuse_module(__name__)
