"""Reading and writing model files: safetensors, pickle checkpoints (safely), GGUF headers."""

from core.files.dtypes import DTYPES, DType, dtype_info
from core.files.model_file import TensorIndex, read_tensor_index, sniff_format
from core.files.tensor_info import TensorInfo

__all__ = ["DTYPES", "DType", "TensorIndex", "TensorInfo", "dtype_info", "read_tensor_index", "sniff_format"]
