"""`--init-from` in the trainer: a checkpoint that cannot be read (a gs:// path that does not
exist or that the job may not read, Cloud Storage out of reach) or that is another model's
is refused in one line naming the flag, the path and what went wrong, exit 2, instead of
TensorFlow's traceback (and, on Vertex AI, "no known cause in the log")."""

from __future__ import annotations

from collections import deque

from trainer.args import INIT_CHECKPOINT_TYPES, TrainArgs, shown
from trainer.common import io
from trainer.common.errors import SettingsError

FLAG = shown(TrainArgs, "init_checkpoint")  # --init-from
TYPE_FLAG = shown(TrainArgs, "init_checkpoint_type")  # --init-type
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"  # a variable's key in an object-based checkpoint
SHOWN_NAMES = 3  # variables named in the one line


def check_readable(path: str) -> None:
    """A checkpoint prefix (with its .index) or a directory holding one, readable from here:
    checked at the trainer's start, before the model is built."""
    failures: tuple[type[BaseException], ...] = (OSError,)
    if io.is_url(path):  # TensorFlow's file systems read it
        import tensorflow as tf

        failures += (tf.errors.OpError,)
    try:
        if io.isdir(path):
            import tensorflow as tf

            found = bool(tf.train.latest_checkpoint(path))
        else:
            found = io.exists(f"{path}.index")
    except failures as error:  # the store's answer, in one line
        raise unreadable(path, error) from None
    if not found:
        raise SettingsError(f"{FLAG} {path} not found: pass a checkpoint prefix "
                            "(.../ckpt-N with ckpt-N.index beside it) or a directory of them")


def unreadable(path: str, error: BaseException) -> SettingsError:
    """The error's first line (TensorFlow's message without its type, which runs on to the
    call that failed), with what to check."""
    reason = (getattr(error, "message", None) or str(error)).strip().splitlines() or [""]
    where = "the job's service account may read it" if io.is_url(path) else "you may read it"
    return SettingsError(f"{FLAG} {path} cannot be read: {reason[0][:300]}; check that the "
                         f"path exists and that {where}")


def guard(task, path: str | None, init_type: str, experiment: str) -> None:
    """Wraps the task's `initialize` (Model Garden restores --init-from there, on a fresh
    start): a checkpoint it cannot read or whose variables are not the model's becomes one
    SettingsError line, which names the variables that did not match."""
    if not path:
        return
    import tensorflow as tf

    restore = task.initialize

    def initialize(model) -> None:
        try:
            if reads_a_run(path, init_type):
                from_run(model, path, init_type)
            else:
                restore(model)
        except tf.errors.OpError as error:
            raise unreadable(path, error) from None
        except (AssertionError, ValueError) as error:  # unmatched objects, other shapes
            raise SettingsError(not_this_model(path, init_type, experiment, model, error)
                                ) from None
        print(restored_line(path, init_type), flush=True)

    task.initialize = initialize


def _prefix(path: str) -> str:
    import tensorflow as tf

    return (tf.train.latest_checkpoint(path) or path) if io.isdir(path) else path


def of_a_run(path: str) -> bool:
    """Whether the checkpoint is a training run's (its modules under `model`, beside the
    optimizer's slots), not a backbone's or a detector's own (modules at its root, as Model
    Garden's --init-type backbone and decoder read them)."""
    import tensorflow as tf

    tops = {key.split("/", 1)[0] for key, _ in tf.train.list_variables(_prefix(path))}
    return "model" in tops and not tops & {"backbone", "decoder"}


def reads_a_run(path: str, init_type: str) -> bool:
    """Whether the modules of `init_type` are read from under a run's `model` (every layer
    is read from there by Model Garden itself)."""
    return INIT_CHECKPOINT_TYPES[init_type] != "all" and of_a_run(path)


def from_run(model, path: str, init_type: str) -> None:
    """The modules of an --init-type read from a run's checkpoint, another experiment's
    (a RetinaNet run's backbone and FPN for a Mask R-CNN): the same read as Model Garden's,
    one level down."""
    import tensorflow as tf

    modules = tf.train.Checkpoint(**restored_items(model, init_type))
    tf.train.Checkpoint(model=modules).read(_prefix(path)).expect_partial() \
        .assert_existing_objects_matched()


def restored_line(path: str, init_type: str) -> str:
    """What a fresh start said it restored (Model Garden logs it only at INFO, hidden)."""
    modules = INIT_CHECKPOINT_TYPES[init_type]
    what = "every layer" if modules == "all" else \
        "the " + " and ".join([modules] if isinstance(modules, str) else modules)
    return f"--init-from: restored {what} from {path} (--init-type {init_type})"


def restored_items(model, init_type: str) -> dict:
    """What Model Garden's task.initialize restores for an --init-type (tf-models-official
    2.20: official/core/base_task.py, vision/tasks/retinanet.py): every layer is the model's
    `checkpoint_items`; otherwise the modules named, by name."""
    modules = INIT_CHECKPOINT_TYPES[init_type]
    if modules == "all":
        return dict(getattr(model, "checkpoint_items", None) or {"model": model})
    return {name: getattr(model, name) for name in ("backbone", "decoder") if name in modules}


def variable_shapes(items: dict) -> dict[str, list[int]]:
    """The key and shape of each variable a tf.train.Checkpoint of `items` reads: the shortest
    path from the root, breadth first, names escaped as TensorFlow's object graph does
    (escape_local_name in TF 2.20's python/trackable/trackable_utils.py), so they compare
    with tf.train.list_variables."""
    import tensorflow as tf

    root = tf.train.Checkpoint(**items)
    view = tf.train.TrackableView(root)
    seen, shapes = {id(root)}, {}
    queue: deque = deque([(root, "")])
    while queue:
        parent, path = queue.popleft()
        for name, child in view.children(parent).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            key = path + name.replace(".", "..").replace("/", ".S")
            if hasattr(child, "shape") and hasattr(child, "dtype"):  # tf's or Keras 3's
                shapes[key + VALUE_SUFFIX] = list(child.shape)
            queue.append((child, key + "/"))
    return shapes


def _names(keys: list[str]) -> str:
    shown_keys = ", ".join(k.removesuffix(VALUE_SUFFIX) for k in keys[:SHOWN_NAMES])
    return shown_keys + (", ..." if len(keys) > SHOWN_NAMES else "")


def not_this_model(path: str, init_type: str, experiment: str, model,
                   error: BaseException) -> str:
    """What did not match, from the checkpoint's index (tf.train.list_variables) and the
    variables the restore reads: those missing, those of other shapes."""
    import tensorflow as tf

    items = restored_items(model, init_type)
    names = list(items)
    head = (f"{FLAG} {path} is not a checkpoint of {experiment}'s "
            f"{' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)}"
            f" ({TYPE_FLAG} {init_type})")
    fix = ("give a checkpoint of this experiment (an earlier run), or restore less: "
           f"{TYPE_FLAG} backbone takes only the backbone" if init_type != "backbone" else
           "give a checkpoint with this experiment's backbone (`invoke models.pretrained` "
           "lists those that fit)")
    try:
        have = dict(tf.train.list_variables(_prefix(path)))
        want = variable_shapes({"model": tf.train.Checkpoint(**items)}
                               if reads_a_run(path, init_type) else items)
    except Exception:  # the restore's own words, then: the checkpoint was read once already
        return f"{head}: {str(error).strip()[:200]}; {fix}"
    missing = [key for key in want if key not in have]
    reshaped = [key for key in want if key in have and list(have[key]) != want[key]]
    problems = []
    if missing:
        problems.append(f"{len(missing)} of the {len(want)} variables it restores are not in "
                        f"the checkpoint ({_names(missing)})")
    if reshaped:
        key = reshaped[0]
        problems.append(f"{len(reshaped)} of the {len(want)} variables it restores have "
                        f"other shapes ({_names(reshaped)}; "
                        f"{key.removesuffix(VALUE_SUFFIX)} is {list(have[key])} there and "
                        f"{want[key]} here)")
    if not problems:
        problems.append("its variables are not this model's")
    tops = sorted({key.split("/", 1)[0] for key in have if not key.startswith("_")})
    return f"{head}: {'; '.join(problems)}; the checkpoint holds {', '.join(tops[:8])}: {fix}"
