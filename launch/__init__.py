"""Client-side launch logic, a folder a layer (docs/design.md "Layers, and where to add
things"): cli, features, targets, stores, context and values, over errors, plots and text."""
