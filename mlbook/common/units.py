"""Units, once. Names carry their unit (``_bytes``, ``_s``, ``_flops``)."""

KIB = 2**10
MIB = 2**20
GIB = 2**30  # memory is reported in GiB
GB = 1e9  # datasheets print decimal gigabytes
TB = 1e12
GIGA = 1e9
TERA = 1e12
MINUTE_S = 60.0
HOUR_S = 3600.0
DAY_S = 86_400.0
