"""Many agents and many devices: members (seeds x sweep values), device sharding,
data-parallel learning and multi-process runs. The only layer that names mesh axes."""
