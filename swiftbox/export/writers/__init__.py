"""One module per library that writes an export, each named by a method record's `writer` (swiftbox/quant_methods.py):
transformers.py (bnb, fp8), gptqmodel.py (gptq, awq), gguf.py (a whole model as GGUF) and gguf_adapter.py (the gguf
record's whole-step writer: a LoRA adapter alone as a GGUF LoRA, else gguf.py). How to add one: docs/architecture.md,
"How to add an export writer".
"""
