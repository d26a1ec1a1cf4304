"""Video decoding as robot-learning loaders do it: synthetic LeRobot-layout datasets (``clips``) and
their reader (``dataset``), decoders behind one interface (``backends``), access patterns
(``patterns``), measurements (``measure``) and DataLoader-driven decoding with interference
(``loader``). The ``decode`` workload (``benchbay.workloads.decode``) puts them together."""
