"""Oxford-IIIT Pets: `images/`, `annotations/trainval.txt`, `annotations/xmls/` (and
`annotations/trimaps/` for masks). The class is the breed in each file name; the split is
the Object Detection API's (trainval.txt, seeded 70/30) unless `--split` says otherwise."""

from __future__ import annotations

from trainer.data import pets
from trainer.data.formats import Input, Options, Planned
from trainer.data.label_map import pets_label_map
from trainer.data.planning import Plan, Source, deduplicate, source_ids, split_names
from trainer.errors import ConversionError, SettingsError

REASONS: dict[str, str] = {}  # its trimaps' are the core's, which reads them (reasons.CORE)


def plan(source: Input, options: Options) -> Planned:
    """Plans a Pets conversion from `annotations/trainval.txt`."""
    if source.data_dir is None:
        raise SettingsError("--format pets needs --data-dir")
    data_dir = source.data_dir
    trainval = data_dir / pets.TRAINVAL_LIST
    if not trainval.is_file():
        raise ConversionError(
            f"{trainval} not found: --data-dir must hold the Oxford-IIIT Pets layout "
            "(images/, annotations/trainval.txt, annotations/xmls/); run `invoke data.download` "
            "or `invoke data.sample` first"
        )
    unique, problems = deduplicate({"trainval": pets.read_example_list(trainval)},
                                   lambda name: pets.image_path(data_dir, name),
                                   pets.TRAINVAL_LIST)
    names = unique["trainval"]
    ids, root = source_ids(names), data_dir.resolve()
    return Planned(Plan({
        split: [
            Source(
                name=name,
                image_path=pets.image_path(data_dir, name),
                xml_path=pets.xml_path(data_dir, name),
                source_id=ids[name],
                root=root,
                class_name=pets.breed_of(name) or name,
                trimap_path=pets.trimap_path(data_dir, name) if options.masks else None,
            )
            for name in split_list
        ]
        for split, split_list in split_names(names, options.split).items()
    }, problems, options.masks), pets_label_map())
