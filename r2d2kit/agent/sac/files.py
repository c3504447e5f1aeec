"""The files a recurrent SAC checkpoint holds (no TensorFlow import: evaluation reads the names first)."""

# each network's Keras weights file, without the .weights.h5 suffix
WEIGHT_FILES = {"actor_body": "sac_actor_body", "critic_body": "sac_critic_body", "policy_head": "sac_policy_head",
                "q_head": "sac_q_head", "target_critic_body": "sac_target_critic_body",
                "target_q_head": "sac_target_q_head"}
STATE_FILE = "sac_learner.npz"  # the optimisers' slots, log(alpha), the update count (plain arrays)
POLICY_WEIGHTS_FILE = "sac_policy.weights.h5"  # the acting policy model: what an evaluation loads
