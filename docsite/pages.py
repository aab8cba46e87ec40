"""The generated reference pages, one function each, registered by their path under docs/.
Every page reads the data it describes at the moment it is made; `write()` rewrites them
and `stale()` names those whose file differs from what they would be now."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from docsite.markdown import code, page, table

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
Stacks = Mapping[str, dict]  # environment -> its synthesised cdk.tf.json


@dataclasses.dataclass(frozen=True)
class Page:
    title: str
    about: str  # one line for the reference index
    render: Callable[..., str]
    needs_stacks: bool = False  # made from the synthesised stacks (a synth is 15 CPU-s)


def settings_page() -> str:
    from launch.context.settings import CONFIG_SECTION, ENV_PREFIX, SETTINGS, flag

    rows = ((code(field), code(flag(field)) if setting.flag else "-",
             code(f"{ENV_PREFIX}{field.upper()}"), code(f"{CONFIG_SECTION}.{field}"),
             code(setting.output), setting.what) for field, setting in SETTINGS.items())
    return page(
        "Settings", "launch/context/settings.py `SETTINGS`",
        f"""Where cloud tasks run and as whom. Each setting comes from the first of: its flag
        (four have one), its `{ENV_PREFIX}` environment variable, invoke.yaml's
        `{CONFIG_SECTION}:` section, and the stack output that `npx cdktn deploy
        --outputs-file infra/outputs.json` writes, of the environment `--env` (or
        invoke.yaml's `environment`, else `dev`) names. A task asks only for the settings it
        uses, and a missing one is named with these ways to give it.""",
        table(("setting", "flag", "environment variable", "invoke.yaml", "stack output",
               "what it is"), rows))


def job_file_page() -> str:
    from launch.values import jobfile
    from launch.values.target_names import TARGETS
    from trainer.common.options import kind

    def tasks(field) -> str:
        return ", ".join(task for task in jobfile.TASKS if task in field.metadata["tasks"])

    def where(field, target: str | None = None) -> str:
        section = field.metadata["section"]
        top = field.metadata["tasks"] - {section}
        inner = f" {target}:" if target else ""
        parts = [(f"`{target}:`" if target else "top") if top else "",
                 f"`{jobfile.SECTIONS[section]}:{inner}`" if section else ""]
        return " and ".join(part for part in parts if part)

    def limits(field) -> str:
        bound, choices = field.metadata["bound"], field.metadata["choices"]
        shown = []
        if choices:
            shown.append("one of " + ", ".join(f"`{c}`" for c in choices))
        if bound:
            shown.append(bound.words() + (f", at most {bound.maximum:g}"
                                          if bound.maximum is not None else ""))
        return "; ".join(shown) or "-"

    def default(field) -> str:
        value = jobfile.default(field)
        return "-" if value in (None, (), {}) else code(value)

    def needs(field) -> str:
        return code(field.metadata["needs"]) if field.metadata["needs"] else "-"

    def row(field, target: str | None = None) -> tuple:
        return (code(jobfile.key(field)), code(jobfile.flag(field.name)), tasks(field),
                where(field, target), kind(field.type).__name__, default(field),
                limits(field), needs(field), field.metadata["help"])

    headers = ("key", "flag", "tasks", "in the file", "type", "default", "bounds", "needs",
               "what it is")
    owned = [f"## `{target}:` the {target} target's own options\n\n" +
             table(headers, [row(field, target) for field in jobfile.own_options(target)])
             for target in TARGETS if jobfile.own_options(target)]
    specs = {target: TARGETS[target] for target in TARGETS}
    known = {capability for spec in specs.values() for capability in spec.capabilities} | {
        field.metadata["needs"] for field in jobfile.FIELDS.values() if field.metadata["needs"]}
    abilities = table(("capability", "a target without it cannot", "targets that have it"), (
        (code(capability), capability.words,
         ", ".join(name for name, spec in specs.items() if spec.can(capability)) or "-")
        for capability in sorted(known, key=lambda capability: capability.name)))
    renamed = table(("version", "a key of the version before", "is now"), (
        (version, code(": ".join(old)), code(": ".join(new)))
        for version, moves in jobfile.RENAMED.items() for old, new in moves.items()))
    return page(
        "Job files and flags", "launch/values/jobfile.py `JobFile`, each target's own options "
        "(launch/targets/NAME/options.py) and `RENAMED`",
        f"""The options `invoke train`, `tune` and `eval` share. Each is a flag of those tasks
        and a key of a job file (`--save-job FILE` writes one, `--job FILE` reads it, flags
        given with it win), checked the same way wherever it comes from. A file begins with
        `version: {jobfile.VERSION}`. The job's own keys are neutral, the same for every
        target, and read from the top of the file, or from its `eval:` section for
        evaluation's own hardware and from `tune:` for the sweep; a key that `needs` a
        capability is refused, at other than its default, on a target without it. Each
        target's own options sit in its section (`vertex:`; evaluation's in `eval:
        vertex:`). Types: `str`; `int` and `float` take the bounds shown; `bool` is a flag
        without a value and `true`/`false` in a file; `tuple` is a repeatable flag (or a
        comma-separated one) and a list in a file; `dict` is `KEY=VALUE` repeated, a mapping
        in a file. A file is read as YAML 1.2 (trainer/common/yamlfile.py, the reader of
        every YAML a user hands in): a repeated key, a number YAML 1.1 reads otherwise
        (`010`, `1:30`, `0x10`, `1_000`), `yes`/`no`/`on`/`off`, a number of more than 100
        characters, `.nan`/`.inf`, an alias (`*name`) and a tag (`!!...`) are each refused
        in one line, `FILE: line N: what — fix`, exit 2; quote a value meant as text
        (`'010'`). `--rerun` reads a run's stored job file the same way; `--save-job` quotes
        text either version would read as another type.""",
        table(headers, [row(field) for field in jobfile.FIELDS.values()]),
        *owned,
        "## What targets can do\n\nA target declares its capabilities in its package "
        "(launch/targets/NAME/__init__.py); a value that needs one it lacks is refused in "
        "these words: `--spot: the local target cannot run spot capacity: add --target "
        "vertex, or drop --spot`.\n\n" + abilities,
        "## Versions and renamed keys\n\nA file without `version:` is version 1 (every "
        "file written before version 2). Its keys are moved as this table says before the "
        "file is read, so a stored job file replays (`--rerun`, `--job`); a file of a "
        "version newer than the launcher's is refused.\n\n" + renamed,
        "The guide: [Fine-tuning and job files](../guides/fine-tuning.md).")


def tasks_page() -> str:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    namespace = importlib.import_module("tasks").namespace
    sections = []
    for name in sorted(namespace.task_names):
        task = namespace[name]
        doc = inspect.cleandoc(task.__doc__ or "").split("\n\n")[0]
        rows = [(code("--" + argument.name.replace("_", "-")), argument.help or "")
                for argument in _arguments(task)]
        flags = table(("flag", "what it is"), rows) if rows else "No flags."
        sections.append(f"## invoke {name}\n\n{' '.join(doc.split())}\n\n{flags}")
    return page(
        "invoke tasks", "tasks.py's task collection",
        """What researchers type: every task, its first line of help and its flags, as
        `invoke --help TASK` prints them (`invoke --list` is the menu). Every task exits 2
        with one `error:` line for a mistake of yours and 1 for work that ran and failed
        ([exit codes](../design/exit-codes.md)).""",
        *sections)


def _arguments(task) -> list:
    """The task's arguments, leaving it as it was: invoke's `get_arguments` pops each help
    text off the task (a second call, or the task's own `--help`, would find none)."""
    kept = dict(task.help)
    try:
        return task.get_arguments()
    finally:
        task.help = kept


def formats_page() -> str:
    from trainer.data import formats, reasons

    rows = []
    for name, module in formats.FORMATS.items():
        rows.append((code(name), " ".join((module.__doc__ or "").split("\n\n")[0].split())))
    sections = [table(("format", "what it reads"), rows)]
    own = reasons.every()
    for owner, explained in own.items():
        if explained:
            shown = table(("reason", "what the conversion did"),
                          ((code(key), text) for key, text in sorted(explained.items())))
            sections.append(f"## Report reasons: {owner}\n\n{shown}")
    sections.append("Formats with no reasons of their own: "
                    + ", ".join(f"`{name}`" for name, explained in own.items()
                                if not explained) + ".")
    return page(
        "Data formats and report reasons", "trainer/data/formats and trainer/data/reasons.py",
        """The formats `invoke data.convert --format` reads, and every reason a conversion
        report (`conversion_report.json`) counts: what was skipped (an image left out),
        dropped (a second copy), repaired (converted after a fix) or flagged (converted as it
        is, worth a look). The guides: [your data](../guides/data.md) and
        [formats](../guides/formats.md).""",
        *sections)


def hardware_page() -> str:
    from launch.targets.vertex.hardware import catalogue

    facts = catalogue()
    flex = set(facts["scheduling"]["flex_start"]["accelerators"])
    gpus = table(("machine type", "accelerator", "count"),
                 ((code(machine), code(accelerator), count)
                  for machine, (accelerator, count) in facts["gpu_machines"].items()))
    accelerators = table(
        ("accelerator", "regions", "flex-start"),
        ((code(name), ", ".join(regions), "yes" if name in flex else "-")
         for name, regions in facts["regions"].items()))
    tpus = table(
        ("`--tpu`", "machine type", "topology or accelerator", "hosts", "chips"),
        _tpu_rows(facts))
    tpu_regions = table(("TPU generation", "regions"),
                        ((generation, ", ".join(regions))
                         for generation, regions in facts["tpu_regions"].items()))
    cpus = table(("CPU family", "GB of memory per vCPU"),
                 ((code(family), gb) for family, gb in facts["memory_per_vcpu"].items()))
    smallest = ", ".join(f"{kind} {vcpus} vCPUs" for kind, vcpus in
                         facts["training_min_vcpus"].items())
    disks = facts["boot_disks"]
    boot = table(("machine family", "boot disk", "source"),
                 ((code(family), code(chosen["type"]) if chosen["type"] else
                   "Vertex AI's default", " ".join(chosen["source"].split()))
                  for family, chosen in disks["families"].items()))
    not_offered = "\n".join(f"- {text}" for text in facts["tpus_not_offered"].values())
    arm = table(("machine series", "hosts", "source"),
                ((code(series), host["what"], f"<{host['source']}> (read {host['read']})")
                 for series, host in facts["arm_hosts"].items()))
    no_tf = ", ".join(facts["tpu_generations_without_tensorflow"])
    sources = "\n".join(f"- {name}: <{url}>" for name, url in facts["sources"].items())
    return page(
        "Machines, accelerators, regions", "launch/targets/vertex/catalogue.yaml",
        f"""What Vertex AI custom training runs on, as the launcher checks every job against
        it before any request (taken {facts['taken']}). The default machine is
        `{facts['default_machine']}`. A GPU machine type comes with its accelerator;
        `--accelerator TYPE:COUNT` is for N1 machines. Flex-start (Dynamic Workload
        Scheduler) takes the accelerators marked below, for at most
        {facts['scheduling']['flex_start']['max_timeout_hours']} hours. The guide:
        [jobs on Vertex AI](../guides/vertex-ai.md).""",
        f"## GPU machine types\n\n{gpus}",
        f"## Accelerators and where they train\n\n{accelerators}",
        f"## TPUs\n\n{tpus}\nTPU VM generations by region:\n\n{tpu_regions}\n"
        f"Generations Vertex AI documents without TensorFlow (allowed, with a warning): "
        f"{no_tf}. Not offered for custom training:\n\n{not_offered}",
        f"## CPU machine families\n\nAny size Compute Engine offers (`FAMILY-N` has N vCPUs);"
        f" the memory sets the price. Training takes at least: {smallest} (smaller ones "
        f"serve endpoints).\n\n{cpus}",
        f"## Arm hosts: refused\n\nThe project builds x86-64 images, and an Arm host runs only "
        f"images built for Arm: a machine of these series (or its accelerator) is refused in "
        f"one line naming why. Every other family here has Intel or AMD hosts.\n\n{arm}",
        f"## Boot disks\n\nEvery replica boots from `{disks['default']}` but the families "
        f"below, which take no Persistent Disk:\n\n{boot}",
        f"## Sources\n\n{sources}")


def _tpu_rows(facts: dict) -> list[tuple]:
    rows = []
    for name, shape in facts["tpu_names"].items():
        machine = shape["machine_type"]
        if "accelerator" in shape:
            cores = facts["cloud_tpu_accelerators"][shape["accelerator"]]
            rows.append((code(name), code(machine), code(shape["accelerator"]), 1,
                         f"{cores} cores"))
            continue
        vm = facts["tpu_machines"][machine]
        hosts = vm["topologies"][shape["topology"]]
        rows.append((code(name), code(machine), shape["topology"], hosts,
                     hosts * vm["chips_per_host"]))
    return rows


def prices_page() -> str:
    from launch.stores.pricing.table import COLUMNS, PRICES_FILE, PriceTable

    prices = PriceTable.load()
    sections = []
    for use in ("training", "prediction"):
        for region in prices.regions(use):
            keys = sorted({key[:4] for key in prices.rows if key[:2] == (use, region)})
            rows = [(key[2], code(key[3]),
                     *(_price(prices.rows.get((*key, column))) for column in COLUMNS))
                    for key in keys]
            sections.append(f"## {use.capitalize()}, {region}\n\n"
                            + table(("kind", "name", *COLUMNS), rows))
    origins = sorted({(row.source, row.read, row.confirmed) for row in prices.rows.values()})
    listed = "\n".join(f"- {source}, read {read}"
                       f"{'' if confirmed else ' (not confirmed by the Billing Catalog API)'}"
                       for source, read, confirmed in origins)
    return page(
        "Prices", f"launch/stores/{PRICES_FILE.parent.name}/{PRICES_FILE.name}",
        f"""Hourly prices in {prices.currency} that cost estimates, `--max-cost` and the dry
        runs use: per vCPU-hour (cores) and GB-hour (ram) of each machine family, per
        accelerator-hour (TPU v2/v3: per core), per TPU chip-hour; `-` where a column does
        not apply or is not known. A price marked `*` was not confirmed by the Cloud Billing
        Catalog API: estimates built on it say so. `invoke pricing.refresh` rewrites the
        table from the Billing Catalog. The guide: [hardware and cost](../guides/cost.md).""",
        *sections, f"## Sources\n\n{listed}")


def _price(row) -> str:
    return "-" if row is None else f"{row.usd:g}{'' if row.confirmed else ' *'}"


def capacity_page() -> str:
    from launch.targets.vertex.capacity import Capacity, assumptions, table

    capacity = Capacity.load()
    speed = capacity.speed
    return page(
        "Conversion capacity", "launch/targets/vertex/capacity.yaml and capacity.py",
        f"""How long one machine takes to convert a dataset, what it costs and how far one
        machine goes, from the speed measured on {capacity.measured_on}
        ({speed.images_per_core_second:g} images/s and {speed.mb_per_core_second:g} MB/s a
        core, scaling efficiency {speed.scaling_efficiency:g}) and the facts below. Bold: a
        limit the conversion would pass. The guide: [hardware and cost](../guides/cost.md);
        the design: [conversion capacity](../design/conversion-capacity.md).""",
        "\n".join(table(capacity)) + "\n",
        "## What the table rests on\n\n" + "\n".join(assumptions(capacity)))


def pretrained_page() -> str:
    from launch.values.pretrained import catalogue, taken
    from trainer.model.experiments import fields

    rows = []
    for entry in catalogue().values():
        fits = [name for name in fields.registered() if entry.fits(name)]
        shape = entry.backbone + (f", {entry.decoder}" if entry.decoder else "")
        rows.append((code(entry.name), entry.holds, shape, entry.about,
                     ", ".join(f"`{name}`" for name in fits) or "-",
                     code(entry.path), f"<{entry.source}>"))
    return page(
        "Pretrained checkpoints", "launch/values/pretrained.yaml",
        f"""Model Garden's published checkpoints that `invoke train --init-from NAME` takes
        (looked up {taken()}; `invoke models.pretrained` prints the same). A
        backbone is an ImageNet classifier: its backbone is restored. A detector is a COCO
        detector: backbone and decoder are restored when they match the experiment's. Or
        give a checkpoint of your own: `--init-from gs://BUCKET/runs/RUN_ID/checkpoints`,
        `--init-type all` when it has your classes. The guide:
        [fine-tuning](../guides/fine-tuning.md).""",
        table(("name", "holds", "backbone, decoder", "what it is", "fits", "path", "source"),
              rows))


def iam_page(stacks: Stacks) -> str:
    from infra.synthesized import grants, permissions

    sections = []
    for env in sorted(stacks):
        held: dict[str, list[tuple[str, str]]] = {}
        for who, where, role in sorted(grants(stacks[env])):
            held.setdefault(who, []).append((where, role))
        lines = [f"## {env}"]
        for who, pairs in held.items():
            lines.append(f"### {who}\n\n" + table(("on", "role"),
                                                  ((where, code(role)) for where, role in pairs)))
        for role, granted in permissions(stacks[env]).items():
            lines.append(f"### custom role {role}\n\n"
                         + ", ".join(f"`{name}`" for name in granted))
        sections.append("\n\n".join(lines))
    return page(
        "IAM grants", "the synthesised stacks (infra/main.py)",
        """Every IAM grant each stack makes, read from what `cdktn synth` writes: who
        (a service account's id, the researchers' group, GitHub's principal set), on what
        (the project, a bucket, the image repository, the job-events topic, another service
        account), with the condition's title where a grant has one, and the permissions of
        the stack's custom roles. No primitive role, no public member, no key. Why each is
        there: the [security model](../platform/security.md).""",
        *sections)


def dates_page() -> str:
    from launch.targets.vertex.lifecycle import WARN_DAYS, endings

    rows = [(ending.about, ", ".join(f"`{name}`" for name in ending.names),
             ending.end_of_patch or "-", ending.end_of_availability,
             f"<{ending.source}> (read {ending.read})", ending.fix) for ending in endings()]
    return page(
        "Dates that expire", "launch/targets/vertex/catalogue.yaml `lifecycle`",
        f"""Each date on which something the project uses or offers stops being offered, with
        the page that gives it and the day it was read. `invoke doctor` warns from
        {WARN_DAYS} days before an end, with the fix; `model.upload` refuses a prediction
        container on and after its end of availability. When a date changes, change the
        entry, its `source` and its `read` day.""",
        table(("what", "names", "end of patches", "end of availability", "source", "fix"),
              rows))


PAGES: dict[str, Page] = {
    "settings.md": Page("Settings", "every setting, its flag, variable and stack output",
                        settings_page),
    "job-file.md": Page("Job files and flags", "the keys of a job file and the flags of "
                        "train, tune and eval", job_file_page),
    "tasks.md": Page("invoke tasks", "every task and its flags", tasks_page),
    "formats.md": Page("Data formats and report reasons", "the formats and every reason "
                       "a conversion report counts", formats_page),
    "hardware.md": Page("Machines, accelerators, regions", "GPU machines, accelerators by "
                        "region, TPU shapes, flex-start", hardware_page),
    "prices.md": Page("Prices", "hourly prices with their source and date", prices_page),
    "capacity.md": Page("Conversion capacity", "how far one conversion machine goes",
                        capacity_page),
    "pretrained.md": Page("Pretrained checkpoints", "what --init-from takes", pretrained_page),
    "iam.md": Page("IAM grants", "each identity's grants in the synthesised stacks", iam_page,
                   needs_stacks=True),
    "dates.md": Page("Dates that expire", "end dates, with sources", dates_page),
}


def index_page() -> str:
    rows = ((f"[{p.title}]({name})", p.about) for name, p in PAGES.items())
    return page(
        "Reference", "docsite/pages.py `PAGES`",
        """Pages made from the data they describe: change the data (a catalogue, a field, a
        task) and run `invoke docs.reference`; a test fails while a page is stale.""",
        table(("page", "what it lists"), rows))


def render(name: str, stacks: Stacks | None = None) -> str:
    if name == "index.md":
        return index_page()
    entry = PAGES[name]
    return entry.render(stacks) if entry.needs_stacks else entry.render()


def names() -> list[str]:
    return ["index.md", *PAGES]


def path(name: str) -> Path:
    return DOCS / "reference" / name


def stale(stacks: Stacks | None = None) -> list[str]:
    """The pages whose file is not what they would be now (those made from the stacks only
    when `stacks` are given)."""
    return [name for name in names()
            if (stacks is not None or not PAGES.get(name, Page("", "", str)).needs_stacks)
            and (not path(name).is_file() or path(name).read_text() != render(name, stacks))]


def write(stacks: Stacks) -> list[Path]:
    written = []
    for name in names():
        path(name).parent.mkdir(parents=True, exist_ok=True)
        path(name).write_text(render(name, stacks))
        written.append(path(name))
    return written
