"""What a detector answers, whoever runs it: a picture in, detections out (`detector.py`),
masks in image pixels and COCO RLE (`masks.py`), and boxes drawn on the picture
(`visualize.py`). Prediction, evaluation, the export checks and the launcher's endpoints share
these; they import nothing of the trainer."""
