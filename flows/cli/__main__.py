"""`python -m flows.cli` (how torchrun starts each rank)."""

from flows.cli import main

main()
