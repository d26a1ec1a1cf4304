"""The handlers of ``benchbay``'s subcommands, one module per group of the parser in ``benchbay.cli``
(which parses the arguments and calls them): ``suite`` (run, tune, validate, profile, list),
``results`` (show, report, history), ``judge`` (compare, gate, diff, bisect, baseline save) and
``interop`` (pytest-benchmark); what they share: ``resolve`` (the suite, runs and baseline an
argument names) and ``output`` (the console and its tables)."""
