"""Evaluation: checkpoints evaluated with COCO metrics, once or beside training
(`evaluate.py`), and what an evaluation says beyond them: AP per class and the PR curve
(`analysis.py`), the confusion matrix at the operating point (`confusion.py`), and the score
threshold that travels with an export (`operating.py`)."""
