"""Benchmarks (not tests): `smartune bench step` (step time and memory per method, smart-pytorch peer,
dynamic padding). See bench/README.md."""
