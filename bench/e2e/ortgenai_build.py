"""onnxruntime-genai 0.18.0's model builder, with the two fixes it needs for transformers 5 configs
(bench/PEERS.md), then run as the builder's own command line:

  python bench/e2e/ortgenai_build.py -i CKPT -o OUT -p fp32 -e cpu -c CACHE [--extra_options ...]

- Gemma 3: transformers 5 stores `rope_parameters` per layer type; the builder reads the flat
  legacy form (`rope_type`, `rope_local_base_freq`).
- Gemma4Unified: transformers 5.24 loads the text config as heterogeneous (head geometry in
  `per_layer_config`); the builder reads flat `head_dim` / `num_key_value_heads` /
  `global_head_dim` / `num_global_key_value_heads`.
Nothing of the builder is copied: its classes are patched in memory.
"""
import os
import runpy
import sys

import onnxruntime_genai.models as ogm

builder_dir = os.path.dirname(ogm.__file__)
sys.path.insert(0, builder_dir)
import builders.gemma as gemma  # noqa: E402  (the builder's own modules, importable from its dir)
from builders.base import Model  # noqa: E402


def gemma3_rope_init(self, config):
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and "full_attention" in rp:
        full, local = rp["full_attention"], rp["sliding_attention"]
        self.rope_attrs["theta"] = full["rope_theta"]
        self.rope_attrs["rescale_factors"] = full.get("factor", 1) if full.get("rope_type") == "linear" else 1
        config.rope_local_base_freq = local["rope_theta"]
    else:
        Model.make_rope_init(self, config)


def gemma3_rope_caches(self):
    # global (scaled) and local (unscaled) cos/sin caches
    self.cos_cache_global_name, self.sin_cache_global_name = "cos_cache_global", "sin_cache_global"
    Model.make_rotary_embedding_caches(self, cos_cache_name="cos_cache_global", sin_cache_name="sin_cache_global")
    self.rope_attrs.update(create_caches=True, theta=self.rope_local_theta, rescale_factors=1)
    self.cos_cache_local_name, self.sin_cache_local_name = "cos_cache_local", "sin_cache_local"
    Model.make_rotary_embedding_caches(self, cos_cache_name="cos_cache_local", sin_cache_name="sin_cache_local")


_gemma4_init = gemma.Gemma4Model.__init__


def gemma4_init(self, config, *args, **kwargs):
    text = getattr(config, "text_config", None) or config
    if getattr(text, "_heterogeneity_spec", None) is not None and not hasattr(text, "global_head_dim"):
        types = list(text.layer_types)
        full = text.per_layer_config[types.index("full_attention")]
        local = text.per_layer_config[types.index("sliding_attention")]
        flat = dict(global_head_dim=full.head_dim, num_global_key_value_heads=full.num_key_value_heads,
                    head_dim=local.head_dim, num_key_value_heads=local.num_key_value_heads)
        for c in {id(config): config, id(text): text}.values():
            c.allow_global_per_layer_attribute_access = True
            for k, v in flat.items():
                setattr(c, k, v)
    _gemma4_init(self, config, *args, **kwargs)


gemma.Gemma3Model.make_rope_init = gemma3_rope_init
gemma.Gemma3Model.make_rotary_embedding_multi_cache = gemma3_rope_caches
gemma.Gemma4Model.__init__ = gemma4_init

if __name__ == "__main__":
    sys.argv[0] = os.path.join(builder_dir, "builder.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
