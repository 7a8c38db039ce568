"""Faces read as InsightFace's face analysis reads them (what IP-Adapter FaceID needs): the
``buffalo_l`` ONNX files artists keep in ComfyUI's ``models/insightface/models/buffalo_l`` (the
SCRFD detector ``det_10g.onnx`` and the ArcFace recogniser ``w600k_r50.onnx``), recognised by
their ONNX signature (:mod:`core.faces.files`) and run with onnxruntime: detection
(:mod:`core.faces.detector`), the 5-point alignment (:mod:`core.faces.align`) and the identity
embedding (:mod:`core.faces.analysis`)."""
