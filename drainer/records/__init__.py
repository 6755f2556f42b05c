"""Records as data: the driver's half of declared formats (schema files, the registry)."""
