"""retool-eval: evaluate a model with the training rollout (verl's ToolAgentLoop, the recipe's tool and reward).

``problems`` reads and validates the data, ``engine`` runs the samples, ``cli`` is the command (``retool-eval``).
"""
