"""Prediction: a detector (a SavedModel or a `.tflite` export) run on image files, annotated
pictures and detections.json (`predict.py`). It calls the exports' signatures (`trainer.export`)
at the threshold their evaluation chose (`trainer.evaluation.operating`)."""
