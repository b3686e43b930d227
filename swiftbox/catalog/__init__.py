"""What models exist, below the hub that fetches them: the presets (`presets`), the committed toy model with what
builds and measures it (`toy`, `toy_corpus`, `toy_pretrain`, `scoring` — greedy answers, choices and perplexity of a
loaded model, used by the toy's own check and by eval, quantize's quality gate and verify)."""
