"""The export wing: what the quantize step (swiftbox/pipelines/quantize.py) runs, kept out of the step folder.

- checks.py: every refusal an export's input can earn (adapter, already quantized, GGUF architecture, calibration
  data), run by the step's `check` before `<out>.partial` exists;
- calibration.py: calibration and held-out text, the GPTQ/AWQ group size that fits the layers;
- checkpoint.py: the measured and gated export of a transformers checkpoint (gptq, awq, bnb, fp8) around a writer;
- quality.py: the figures, the tensor inspection and the gate every export passes (QualityGateFailed past it);
- progress.py: the layer-by-layer progress bar of a quantize pass;
- writers/: one module per library that writes an export (transformers.py, gptqmodel.py, gguf.py + gguf_adapter.py),
  named by the method records in swiftbox/quant_methods.py;
- llamacpp/: llama.cpp's tools (setup, converter, quantizer, runner, GGUF file reader, Modelfile) - low in the layer
  picture (the device layer), since doctor and verify read it too.

This package's __init__ imports nothing, so `swiftbox.export.llamacpp` stays cheap for the layers below.
"""
