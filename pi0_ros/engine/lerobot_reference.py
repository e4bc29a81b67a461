# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
LeRobot 0.6.1 PI0Policy as a reference: build (any ModelDims), save, and predict.

Used by the equivalence tests and the benchmark; imports lerobot only when called. LeRobot's
configuration offers only the full-size Gemma variants, so smaller ModelDims are applied by
patching its config factories while the policy is constructed.
"""
import contextlib
from unittest import mock

import numpy as np
import torch

from pi0_ros.engine.config import ModelDims

IMAGE_KEY = 'observation.images.cam{}'


@contextlib.contextmanager
def _lerobot_dims(dims: ModelDims):
    """Make LeRobot's pi0 build a model of the given dims (a no-op change for full dims)."""
    import lerobot.policies.pi0.modeling_pi0 as modeling

    def gemma_config(variant):
        if variant == 'gemma_2b':
            return modeling.GemmaConfig(width=dims.prefix_width, depth=dims.prefix_depth,
                                        mlp_dim=dims.prefix_mlp_dim, num_heads=dims.prefix_heads,
                                        num_kv_heads=dims.num_kv_heads, head_dim=dims.head_dim)
        return modeling.GemmaConfig(width=dims.expert_width, depth=dims.expert_depth,
                                    mlp_dim=dims.expert_mlp_dim, num_heads=dims.expert_heads,
                                    num_kv_heads=dims.num_kv_heads, head_dim=dims.head_dim)

    paligemma_class = modeling.PaliGemmaForConditionalGenerationWithPiGemma
    expert_class = modeling.PiGemmaForCausalLM

    def paligemma(config):
        vision = config.vision_config
        vision.hidden_size = dims.vision_width
        vision.intermediate_size = dims.vision_mlp_dim
        vision.num_hidden_layers = dims.vision_depth
        vision.num_attention_heads = dims.vision_heads
        vision.patch_size = dims.patch_size
        vision.image_size = dims.image_size
        vision.projection_dim = dims.prefix_width
        vision.layer_norm_eps = dims.layer_norm_eps
        config.text_config.vocab_size = dims.vocab_size
        config.text_config.rms_norm_eps = dims.rms_norm_eps
        return paligemma_class(config)

    def expert(config):
        config.vocab_size = dims.vocab_size
        config.rms_norm_eps = dims.rms_norm_eps
        return expert_class(config)

    with mock.patch.object(modeling, 'get_gemma_config', gemma_config), \
            mock.patch.object(modeling, 'PaliGemmaForConditionalGenerationWithPiGemma',
                              paligemma), \
            mock.patch.object(modeling, 'PiGemmaForCausalLM', expert):
        yield


def build_lerobot_policy(dims: ModelDims, *, state_dim: int, action_dim: int,
                         num_cameras: int, device: str = 'cpu', dtype: str = 'float32',
                         seed: int = 0, perturb: bool = True):
    """
    Build a randomly initialized PI0Policy directly on `device`, in eval mode.

    perturb adds N(0, 0.02) to every parameter so zero-initialized norms and biases also
    carry information (a wrong key mapping then changes the output).
    """
    from lerobot.configs import FeatureType, PolicyFeature
    from lerobot.policies.pi0.configuration_pi0 import PI0Config
    from lerobot.policies.pi0.modeling_pi0 import PI0Policy

    config = PI0Config(device=device, dtype=dtype, chunk_size=dims.chunk_size,
                       n_action_steps=dims.chunk_size, max_state_dim=dims.max_state_dim,
                       max_action_dim=dims.max_action_dim, num_inference_steps=dims.num_steps,
                       tokenizer_max_length=dims.tokenizer_max_length,
                       image_resolution=(dims.image_size, dims.image_size),
                       min_period=dims.min_period, max_period=dims.max_period)
    features = {IMAGE_KEY.format(cam): PolicyFeature(type=FeatureType.VISUAL,
                                                     shape=(3, dims.image_size, dims.image_size))
                for cam in range(num_cameras)}
    features['observation.state'] = PolicyFeature(type=FeatureType.STATE, shape=(state_dim,))
    config.input_features = features
    config.output_features = {'action': PolicyFeature(type=FeatureType.ACTION,
                                                      shape=(action_dim,))}
    torch.manual_seed(seed)
    with _lerobot_dims(dims), torch.device(device):
        policy = PI0Policy(config)
    if perturb:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed + 1)
        with torch.no_grad():
            for parameter in policy.parameters():
                noise = torch.randn(parameter.shape, generator=generator, device=device)
                parameter.add_((noise * 0.02).to(parameter.dtype))
    return policy.eval()


def make_lerobot_processors(policy, tokenizer, state_stats: dict, action_stats: dict):
    """Make LeRobot's pi0 pre/post-processors, with `tokenizer` instead of PaliGemma's."""
    import lerobot.policies.pi0.processor_pi0 as processor

    stats = {'observation.state': {k: torch.as_tensor(v, dtype=torch.float32)
                                   for k, v in state_stats.items()},
             'action': {k: torch.as_tensor(v, dtype=torch.float32)
                        for k, v in action_stats.items()}}
    tokenizer_step = processor.TokenizerProcessorStep

    def with_tokenizer(**kwargs):
        kwargs.pop('tokenizer_name', None)
        return tokenizer_step(tokenizer=tokenizer, **kwargs)

    with mock.patch.object(processor, 'TokenizerProcessorStep', with_tokenizer):
        return processor.make_pi0_pre_post_processors(policy.config, stats)


def save_lerobot_checkpoint(directory, policy, preprocessor, postprocessor, tokenizer) -> None:
    """Save what a LeRobot training run leaves behind, plus the tokenizer files."""
    policy.save_pretrained(directory)
    preprocessor.save_pretrained(directory)
    postprocessor.save_pretrained(directory)
    tokenizer.save_pretrained(str(directory))


def save_random_reference(directory, dims: ModelDims, *, state_dim: int, action_dim: int,
                          num_cameras: int, policy_seed: int, stats_seed: int) -> dict:
    """
    Build a random LeRobot PI0Policy with random normalization stats and save it as a checkpoint.

    Return {'policy', 'pre', 'post', 'dir', 'action_stats'}: LeRobot's side of an equivalence
    test, and the directory Pi0Engine.from_pretrained loads the same model from.
    """
    from pi0_ros.engine.tokenizer import build_builtin_tokenizer
    rng = np.random.default_rng(stats_seed)
    policy = build_lerobot_policy(dims, state_dim=state_dim, action_dim=action_dim,
                                  num_cameras=num_cameras, seed=policy_seed)
    tokenizer = build_builtin_tokenizer()

    def stats(size):
        return {'mean': rng.normal(size=size).astype(np.float32),
                'std': rng.uniform(0.5, 2.0, size).astype(np.float32)}
    state_stats, action_stats = stats(state_dim), stats(action_dim)
    pre, post = make_lerobot_processors(policy, tokenizer, state_stats, action_stats)
    save_lerobot_checkpoint(directory, policy, pre, post, tokenizer)
    return {'policy': policy, 'pre': pre, 'post': post, 'dir': directory,
            'action_stats': action_stats}


def lerobot_batch(frames, state, instruction, device) -> dict:
    """One raw observation in LeRobot's format (float [0, 1] CHW images)."""
    batch = {IMAGE_KEY.format(cam): torch.from_numpy(np.ascontiguousarray(frame)).to(device)
             .permute(2, 0, 1).float() / 255.0 for cam, frame in enumerate(frames)}
    batch['observation.state'] = torch.as_tensor(np.asarray(state, np.float32), device=device)
    batch['task'] = instruction
    return batch


def set_lerobot_rtc(policy, schedule: str = 'linear', max_guidance_weight: float = 10.0,
                    execution_horizon: int = 10, jacobian: bool = False) -> None:
    """
    Turn on LeRobot's Real-Time Chunking (RTCConfig + RTCProcessor) in a PI0Policy.

    LeRobot 0.6.1's RTCProcessor.denoise_step computes the velocity before it makes x_t
    require gradients, so its autograd correction is the weighted error alone (the velocity
    is a constant of x_t). jacobian=True makes x_t require gradients before the velocity is
    computed, which restores the paper's vector-Jacobian product in the same code.
    """
    from lerobot.configs import RTCAttentionSchedule
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    policy.config.rtc_config = RTCConfig(
        prefix_attention_schedule=RTCAttentionSchedule[schedule.upper()],
        max_guidance_weight=max_guidance_weight, execution_horizon=execution_horizon)
    policy.init_rtc_processor()
    if not jacobian:
        return
    processor = policy.rtc_processor
    lerobot_step = processor.denoise_step

    def denoise_step(x_t, prev_chunk_left_over, inference_delay, time,
                     original_denoise_step_partial, execution_horizon=None):
        def velocity(point):
            point.requires_grad_(True)  # the velocity then depends on x_t under autograd
            return original_denoise_step_partial(point)

        return lerobot_step(x_t=x_t, prev_chunk_left_over=prev_chunk_left_over,
                            inference_delay=inference_delay, time=time,
                            original_denoise_step_partial=velocity,
                            execution_horizon=execution_horizon)

    processor.denoise_step = denoise_step


@torch.no_grad()
def lerobot_predict(policy, preprocessor, postprocessor, frames, state, instruction,
                    noise=None, rtc: dict = None) -> np.ndarray:
    """
    Run LeRobot's full path: preprocessor, predict_action_chunk, postprocessor.

    rtc: predict_action_chunk's Real-Time Chunking arguments (inference_delay,
    prev_chunk_left_over [T, action_dim] normalized, execution_horizon); see set_lerobot_rtc.
    """
    device = next(policy.parameters()).device
    batch = preprocessor(lerobot_batch(frames, state, instruction, device))
    kwargs = dict(rtc or {})
    if noise is not None:
        kwargs['noise'] = torch.as_tensor(np.asarray(noise, np.float32), device=device)[None]
    if kwargs.get('prev_chunk_left_over') is not None:
        kwargs['prev_chunk_left_over'] = torch.as_tensor(
            np.asarray(kwargs['prev_chunk_left_over'], np.float32), device=device)[None]
    actions = policy.predict_action_chunk(batch, **kwargs)
    return postprocessor(actions)[0].float().cpu().numpy()


def lerobot_tensor_getter(policy):
    """get(key) of LeRobot-named tensors (keys without 'model.') from a live policy."""
    state = policy.model.state_dict()

    def get(key):
        return state[key]

    return get
