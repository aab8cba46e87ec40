"""Client-side launch logic, a folder a layer (docs/design/layers.md): cli, features, targets,
stores, context and values, over plots, errors and text."""
