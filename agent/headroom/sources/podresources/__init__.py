"""Generated gRPC code for the kubelet's pod-resources API v1 (``List`` only).

Source: ``api.proto`` in this directory, the wire contract of k8s.io/kubelet
``pkg/apis/podresources/v1/api.proto`` (kubernetes/kubelet commit 63b3249724f7d89a8aa48f9acb3811f193c9aa68).
Generator: grpcio-tools 1.85.1 (protobuf 7.35.1 gencode), run from ``agent/`` as
``python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. headroom/sources/podresources/api.proto``
(``make podresources``). The code is checked in so that installing headroom needs no protoc or build step;
``tests/test_kubelet.py`` regenerates it and fails when it differs. Runtime needs grpcio>=1.85.1 and
protobuf>=7.35.1 (the generated modules check both at import).
"""

GENERATOR = "grpcio-tools 1.85.1"
SOURCE = "k8s.io/kubelet pkg/apis/podresources/v1/api.proto @ 63b3249724f7d89a8aa48f9acb3811f193c9aa68"
