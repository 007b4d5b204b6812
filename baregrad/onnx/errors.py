"""The errors baregrad.onnx raises: each names what was wrong (the node, its operator and opset, the model input)."""

class OnnxError(RuntimeError):
  """An ONNX model cannot be loaded or run: the message says which node or input and why."""

class OnnxLoadError(OnnxError, ValueError):
  """The model file or bytes are not a valid ONNX model (malformed, truncated, missing external data)."""

class UnsupportedOperator(OnnxError, NotImplementedError):
  """The model uses an operator (or an attribute value of one) that baregrad.onnx does not implement."""

class OnnxInputError(OnnxError, ValueError):
  """An input given to the runner does not fit the model's input it was meant for (name, shape, dtype)."""
