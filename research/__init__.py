"""Research behind the documentation (research/README.md): the paper's reproduction, the pool simulated and
replayed, numerics, GPU memory, the checks on a lent GPU. Not shipped, not behind the `smartune` command, and
it may import only the product's public seams; nothing of the product imports it."""
