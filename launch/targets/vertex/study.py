"""Pure functions: a Sweep plus the training CustomJob -> Vertex AI's HyperparameterTuningJob,
and a tuning job's trials -> the table `invoke tune.status` prints.

The trial job spec is the CustomJobSpec `invoke train` builds for the same flags, except that
the trainer is given no --model_dir: each trial then checkpoints to its own AIP_CHECKPOINT_DIR,
which Vertex AI sets to <base output directory>/<trial id>/checkpoints. A trial is therefore
laid out like a run: gs://BUCKET/runs/SWEEP/<trial id>/{checkpoints,model}.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.cloud import aiplatform_v1

from launch.context.places import label_value
from launch.values.sweep import Param, Sweep

StudySpec = aiplatform_v1.StudySpec
ParameterSpec = StudySpec.ParameterSpec
ALGORITHMS = {"bayesian": StudySpec.Algorithm.ALGORITHM_UNSPECIFIED,  # Vizier's default
              "random": StudySpec.Algorithm.RANDOM_SEARCH,
              "grid": StudySpec.Algorithm.GRID_SEARCH}


def parameter_spec(param: Param) -> ParameterSpec:
    """A range is a DOUBLE or INTEGER spec; numbers a DISCRETE one; words CATEGORICAL."""
    spec = ParameterSpec(parameter_id=param.parameter_id)
    if param.is_range:
        if param.integer:
            spec.integer_value_spec = ParameterSpec.IntegerValueSpec(
                min_value=int(param.low), max_value=int(param.high))
        else:
            spec.double_value_spec = ParameterSpec.DoubleValueSpec(
                min_value=float(param.low), max_value=float(param.high))
        spec.scale_type = ParameterSpec.ScaleType[
            "UNIT_LOG_SCALE" if param.log else "UNIT_LINEAR_SCALE"]
    elif all(isinstance(v, (int, float)) for v in param.values):
        spec.discrete_value_spec = ParameterSpec.DiscreteValueSpec(
            values=sorted(float(v) for v in param.values))
    else:
        spec.categorical_value_spec = ParameterSpec.CategoricalValueSpec(
            values=[str(v) for v in param.values])
    return spec


def study_spec(sweep: Sweep) -> StudySpec:
    goal = StudySpec.MetricSpec.GoalType[sweep.goal.upper()]
    return StudySpec(metrics=[StudySpec.MetricSpec(metric_id=sweep.metric, goal=goal)],
                     parameters=[parameter_spec(p) for p in sweep.params],
                     algorithm=ALGORITHMS[sweep.algorithm])


def tuning_job(sweep: Sweep, trial: aiplatform_v1.CustomJob,
               labels: Mapping[str, str] | None = None
               ) -> aiplatform_v1.HyperparameterTuningJob:
    """Every trial runs `trial`'s spec with its values appended as --ID=VALUE flags."""
    return aiplatform_v1.HyperparameterTuningJob(
        display_name=f"tune-{trial.display_name}",
        study_spec=study_spec(sweep),
        max_trial_count=sweep.trials,
        parallel_trial_count=sweep.parallel,
        max_failed_trial_count=sweep.trials,  # a failed trial is a data point, not the end
        trial_job_spec=trial.job_spec,
        labels={k: label_value(v) for k, v in (labels or trial.labels).items()},
    )


def to_json(job: aiplatform_v1.HyperparameterTuningJob) -> str:
    """The REST form, as `--dry-run` prints it."""
    return aiplatform_v1.HyperparameterTuningJob.to_json(
        job, indent=2, use_integers_for_enums=False,
        always_print_fields_with_no_presence=False)


def trial_metric(trial: aiplatform_v1.Trial, metric: str) -> float | None:
    for measured in trial.final_measurement.metrics:
        if measured.metric_id == metric:
            return measured.value
    return None


def trials_table(job: aiplatform_v1.HyperparameterTuningJob) -> str:
    """One line a trial, best first (by the study's goal), then those without a metric."""
    (spec,) = job.study_spec.metrics
    metric, maximize = spec.metric_id, spec.goal.name == "MAXIMIZE"
    measured = [t for t in job.trials if trial_metric(t, metric) is not None]
    measured.sort(key=lambda t: trial_metric(t, metric), reverse=maximize)
    rest = [t for t in job.trials if trial_metric(t, metric) is None]
    lines = [f"{job.display_name}: {job.state.name.removeprefix('JOB_STATE_')}, "
             f"{len(job.trials)} of {job.max_trial_count} trials, {metric} "
             f"{'max' if maximize else 'min'}imized"]
    for trial in measured + rest:
        value = trial_metric(trial, metric)
        shown = "-" if value is None else f"{value:.4f}"
        values = "  ".join(f"{p.parameter_id}={_value(p.value)}" for p in trial.parameters)
        lines.append(f"  trial {trial.id:>4}  {trial.state.name:<10}  {metric} {shown:>8}  "
                     f"{values}")
    return "\n".join(lines)


def _value(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
