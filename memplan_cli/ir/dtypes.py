"""Element sizes of the dtypes memplan knows, by canonical lower-case name. Not string: a string
tensor's bytes depend on its contents, so memplan cannot size one (honest or silent)."""

DTYPE_SIZE = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "bool": 1, "int4": 1, "uint4": 1,
}


def dtype_size(dtype: str) -> int:
    try:
        return DTYPE_SIZE[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}") from None
