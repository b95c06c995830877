"""Data preparation: ReTool-SFT -> multi-turn tool-calling SFT rows (`retool.data.sft`), DAPO-Math-17k / AIME ->
verl RL rows (`retool.data.rl`), shared input loading (`retool.data.io`) and the shared user prompt
(`retool.data.prompt`)."""
