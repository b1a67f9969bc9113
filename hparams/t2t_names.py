"""tensor2tensor's hparam names that are not fields here: what each one becomes, or why it cannot.

T2T users type T2T's names in `--hparams`. `translate(name, value)` gives the fields a T2T
override sets here:

    >>> translate("layer_preprocess_sequence", "n")           # T2T's pre-norm spelling
    {'norm_type': 'pre'}
    >>> translate("ffn_layer", "dense_relu_dense")            # what t2t_lite always does
    {}
    >>> translate("ffn_layer", "conv_relu_conv")
    ValueError: T2T's hparam ffn_layer=conv_relu_conv has no counterpart in t2t_lite: ...

A declared field always wins over an entry here (a field added later replaces its alias), and
`translate` returns None for a name T2T's transformer sets do not have.
"""

# T2T name -> our field, same meaning and type.
RENAMES = {
    "norm_epsilon": "layer_norm_epsilon",
}

# T2T names accepted at the values this package always has (lower-cased; "0" matches any zero);
# a name mapped to None accepts every value: it changes speed or memory in T2T, not the result.
SAME_AS_OURS = {
    "ffn_layer": (("dense_relu_dense",), "the feed-forward network is the paper's dense-relu-dense"),
    "self_attention_type": (("dot_product",), "attention is the paper's scaled dot-product"),
    "multiply_embedding_mode": (("sqrt_depth",), "embeddings are multiplied by sqrt(d_model)"),
    "weight_noise": (("0",), "there is no weight noise"),
    "grad_noise_scale": (("0",), "there is no gradient noise"),
    "scheduled_sampling_prob": (("0",), "there is no scheduled sampling"),
    "num_sampled_classes": (("0",), "the softmax is always full"),
    "split_to_length": (("0",), "examples are never split"),
    "prepend_mode": (("none",), "inputs are never prepended to the targets"),
    "eval_drop_long_sequences": (("false",), "evaluation keeps every pair"),
    "pad_batch": (("false",), "batches are never padded to a multiple"),
    "causal_decoder_self_attention": (("true",), "decoder self-attention is always causal"),
    "unidirectional_encoder": (("false",), "encoder self-attention sees the whole source"),
    "proximity_bias": (("false",), "attention has no proximity bias"),
    "max_relative_position": (("0",), "positions are absolute (sinusoids or learned)"),
    "weight_dtype": (("float32",), "weights are float32 (mixed_precision keeps them so)"),
    "layer_prepostprocess_dropout_broadcast_dims": (("",), "dropout masks are never broadcast"),
    "attention_dropout_broadcast_dims": (("",), "dropout masks are never broadcast"),
    "relu_dropout_broadcast_dims": (("",), "dropout masks are never broadcast"),
    # optimizer=adafactor is T2T's Adafactor with T2T's defaults (t2t_lite.training.optimizers).
    "optimizer_adafactor_beta1": (("0",), "Adafactor keeps no first moment (T2T's default)"),
    "optimizer_adafactor_factored": (("true",), "Adafactor factors 2-D second moments"),
    "optimizer_adafactor_decay_type": (("pow",), "Adafactor's decay is 1 - step^-0.8"),
    "optimizer_adafactor_memory_exponent": (("0.8",), "Adafactor's decay is 1 - step^-0.8"),
    "optimizer_adafactor_clipping_threshold": (("1",), "Adafactor clips updates at RMS 1"),
    "optimizer_adafactor_multiply_by_parameter_scale": (
        ("true",), "Adafactor scales updates by the parameters' RMS"),
    "optimizer_adafactor_beta2": (None, "T2T reads it only with decay_type=adam"),
    "symbol_modality_num_shards": (None, "a TF1 variable-sharding detail"),
    "daisy_chain_variables": (None, "a TF1 multi-GPU placement detail"),
    "use_pad_remover": (None, "a speed detail: padded positions never change the result"),
    "factored_logits": (None, "a memory detail (the loss here never stores the logits)"),
    "summarize_grads": (None, "a TensorBoard detail"),
    "summarize_vars": (None, "a TensorBoard detail"),
    "use_custom_ops": (None, "a speed detail"),
}

# T2T names of transformer hparams with no counterpart here (the error names them plainly).
NO_COUNTERPART = (
    "initializer", "initializer_gain", "kernel_height", "kernel_width", "compress_steps",
    "batch_shuffle_size", "min_length", "min_length_bucket", "pack_dataset", "vocab_divisor",
    "learning_rate_decay_staircase", "learning_rate_decay_rate",
    "learning_rate_minimum", "learning_rate_cosine_cycle_steps", "learning_rate_boundaries",
    "learning_rate_multiples", "optimizer_momentum_momentum", "optimizer_momentum_nesterov",
    "optimizer_zero_grads", "mixed_precision_optimizer_loss_scaler",
    "mixed_precision_optimizer_init_loss_scale", "sampling_method", "sampling_temp",
    "sampling_keep_top_k", "moe_hidden_sizes", "moe_num_experts", "moe_k", "moe_loss_coef",
    "moe_overhead_train", "moe_overhead_eval", "parameter_attention_key_channels",
    "parameter_attention_value_channels", "position_features", "nbr_decoder_problems",
    "conv_first_kernel", "attention_variables_3d", "use_target_space_embedding",
    "overload_eval_metric_name", "hard_attention_k", "gumbel_noise_weight",
    "heads_share_relative_embedding", "add_relative_to_values", "eval_run_autoregressive",
    "force_full_predict", "no_data_parallelism", "pretrained_model_dir", "split_targets_chunk_length",
    "split_targets_max_chunks", "split_targets_strided_training", "video_num_input_frames",
    "video_num_target_frames", "scheduled_sampling_method", "scheduled_sampling_warmup_steps",
    "scheduled_sampling_gold_mixin_prob", "scheduled_sampling_num_passes",
    "scheduled_sampling_warmup_schedule", "multiproblem_schedule_threshold",
    "multiproblem_per_task_threshold", "multiproblem_schedule_max_examples",
    "multiproblem_mixing_schedule", "multiproblem_reweight_label_loss",
    "multiproblem_label_weight", "multiproblem_target_eval_only", "tpu_enable_host_call",
    "mlperf_mode", "max_area_width", "max_area_height", "memory_height",
)


def _no_counterpart(name, text, why):
  return ValueError(f"T2T's hparam {name}={text} has no counterpart in t2t_lite: {why}")


def _pick(name, text, choices, why):
  """`choices[value]` for T2T's value `text` of `name`, else the no-counterpart error."""
  value = text.strip().lower()
  if value not in choices:
    raise _no_counterpart(name, text, why)
  return choices[value]


def _norm_placement(name, text):
  # T2T's layer_{pre,post}process_sequence: n = normalize, d = dropout, a = add the residual.
  choices = ({"n": "pre", "none": "post", "": "post"} if name == "layer_preprocess_sequence"
             else {"da": "pre", "dan": "post"})
  return {"norm_type": _pick(name, text, choices,
                             "only T2T's two placements exist here: pre-norm (n / da, "
                             "norm_type=pre) and post-norm (none / dan, norm_type=post)")}


def _same_value(text, accepted):
  """`text` is one of the `accepted` values (None: any; numbers compare as numbers)."""
  value = text.strip().lower()
  if accepted is None or value in accepted:
    return True
  try:
    return any(float(value) == float(a) for a in accepted)
  except ValueError:
    return False


def _choice(field, choices, why):
  """A translation that sets `field` to `choices[T2T's value]`, or fails saying `why`."""
  return lambda name, text: {field: _pick(name, text, choices, why)}


def _accept(choices, why):
  """A translation that accepts T2T's values in `choices` and sets nothing."""
  return lambda name, text: _pick(name, text, {value: {} for value in choices}, why)


MAPPED = {
    "layer_preprocess_sequence": _norm_placement,
    "layer_postprocess_sequence": _norm_placement,
    "pos": _choice("position_encoding", {"timing": "sinusoid", "emb": "learned"},
                   "positions are sinusoids (timing) or learned (emb)"),
    "activation_dtype": _choice("mixed_precision",
                                {"float32": "float32", "bfloat16": "mixed_bfloat16"},
                                "activations are float32, or bfloat16 with float32 weights "
                                "(mixed_bfloat16)"),
    # T2T's transformer sets all say "noam": the curve of the "legacy" schedule factor.
    "learning_rate_decay_scheme": _accept(("noam",), "the legacy schedule here is T2T's noam decay"),
}


# T2T's spellings of values of names that are our fields too: T2T's value -> ours (None: leave
# the field as it is; T2T's norm_type is the kind of normalization, ours its placement).
T2T_VALUES_OF_OUR_FIELDS = {
    "norm_type": {"layer": None},
    # T2T's multistep_adam is Adam accumulating optimizer_multistep_accumulate_steps batches.
    "optimizer": {"multistep_adam": "adam"},
}

# T2T's decode hparams (utils/decoding.py) that are not fields of DecodeHParams.
DECODE_SAME_AS_OURS = {
    "log_results": (None, "decodes are not logged here"),
    "decode_in_memory": (None, "decodes are always kept in memory"),
    "decode_timeout_mins": (None, "the decoder does not wait for checkpoints"),
    "summaries_log_dir": (None, "the decoder writes no summaries"),
    "decode_to_file": (None, "use the --decode_to_file flag"),
    "decode_reference": (None, "use the --decode_reference flag"),
    "save_images": (("false",), "there are no images"),
    "identity_output": (("false",), "outputs are always text"),
    "skip_eos_postprocess": (("false",), "outputs always stop at EOS"),
    "force_decode_length": (("false",), "outputs always stop at EOS"),
    "min_length_ratio": (("0",), "there is no minimum output length"),
    "eos_penalty": (("0",), "EOS is never penalized"),
    "block_size": (("0",), "there is no blockwise parallel decoding"),
    "guess_and_check_top_k": (("0",), "there is no guess-and-check decoding"),
    "insertion_parallel": (("false",), "there is no insertion decoding"),
    "shards": (("1",), "the decoder decodes its whole input"),
    "shard_id": (("0",), "the decoder decodes its whole input"),
    "shards_start_offset": (("0",), "the decoder decodes its whole input"),
    "multiproblem_task_id": (("-1",), "there are no multi-problems"),
}
DECODE_NO_COUNTERPART = (
    "guess_and_check_epsilon", "shard_google_format", "display_decoded_images",
    "frames_per_second", "border_percent", "max_display_outputs", "max_display_decodes",
    "vgg_ckpt_path", "mlperf_decode_step", "mlperf_threshold", "mlperf_success",
    "export_extra_infer_outputs",
)


def our_value(name: str, text: str) -> str | None:
  """The value text to give our field `name` for the override `name=text`, which may be T2T's
  spelling; None: T2T's value leaves the field as it is. Values are lower-cased for T2T's
  case-insensitive names ("Adafactor")."""
  special = T2T_VALUES_OF_OUR_FIELDS.get(name, {})
  lowered = text.strip().lower()
  if lowered in special:
    return special[lowered]
  return lowered if name in T2T_VALUES_OF_OUR_FIELDS else text


def translate(name: str, text: str, decode: bool = False) -> dict[str, str] | None:
  """{field: value text} that T2T's `name=text` sets here (in DecodeHParams with `decode`);
  None if T2T has no such name.

  Raises:
    ValueError: a T2T name (or value) with no counterpart here, saying so.
  """
  same_as_ours, no_counterpart = ((DECODE_SAME_AS_OURS, DECODE_NO_COUNTERPART) if decode
                                  else (SAME_AS_OURS, NO_COUNTERPART))
  if not decode and name in RENAMES:
    return {RENAMES[name]: text}
  if not decode and name in MAPPED:
    return MAPPED[name](name, text)
  if name in same_as_ours:
    accepted, why = same_as_ours[name]
    if not _same_value(text, accepted):
      raise _no_counterpart(name, text, f"{why} (accepted: {', '.join(accepted)})")
    return {}
  if name in no_counterpart:
    raise _no_counterpart(name, text, "this package has no such setting")
  return None
