"""The local target as the registry names it (launch/values/target_names.py): what it can do,
its own job option (options.py) and its executor (executor.py, imported when a job runs)."""

from launch.targets.local.options import LocalOptions
from launch.values import capabilities
from launch.values.capabilities import TargetSpec

# Its replicas are processes here (workers: any target's); no cloud hardware or capacity.
LOCAL = TargetSpec("launch.targets.local.executor:Local",
                   frozenset({capabilities.BACKGROUND}), LocalOptions)
