"""Exports and their serving signatures: the SavedModel and its `serving_uint8` /
`serving_bytes` signatures (`saved_model.py`), the TFLite file with its host side and int8 gate
(`tflite.py`), TF Serving's warm-up requests (`warmup.py`), and how an export is held to the
SavedModel's answers (`agreement.py`)."""
