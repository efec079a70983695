"""The input-validation layer every loader goes through.

* :mod:`~hulk_env.validation.limits`: every size and magnitude limit, with its reason;
* :mod:`~hulk_env.validation.reading`: safe file reading (size, file type, encoding, nesting,
  YAML aliases, duplicate keys, names unique ignoring case);
* :mod:`~hulk_env.validation.schemas`: pydantic models of the cluster file, the workload file,
  ``policy.json`` and the agent's run config, with errors as one located line.
"""
