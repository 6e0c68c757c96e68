"""A small LightGBM Booster saved as a registry artifact directory, for the registry tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def booster_dir(root: Path, features: list[str]) -> Path:
    """``root`` made, holding ``model.lgb``: two trees over ``features`` (two of them)."""
    import lightgbm

    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 2))
    data = lightgbm.Dataset(x, (x[:, 0] > 0).astype(int), feature_name=features)
    params = {"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5}
    root.mkdir(parents=True)
    lightgbm.train(params, data, num_boost_round=2).save_model(str(root / "model.lgb"))
    return root
