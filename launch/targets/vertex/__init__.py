"""The Vertex AI target as the registry names it (launch/values/target_names.py): what it can
do, its own job options (options.py) and its executor (executor.py, imported with Google's
clients only when a job runs there)."""

from launch.targets.vertex.options import VertexOptions
from launch.values import capabilities as can
from launch.values.capabilities import TargetSpec

VERTEX = TargetSpec(
    "launch.targets.vertex.executor:Vertex",
    frozenset({can.GPU, can.TPU, can.SPOT, can.FLEX_START, can.REGION, can.IMAGE,
               can.MACHINE_TYPE, can.REDUCTION_SERVERS, can.RESERVATION, can.WEB_ACCESS,
               can.TIMEOUT, can.LADDER, can.SUBMIT, can.PRICE}),
    VertexOptions)
