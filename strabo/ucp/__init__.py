"""The UCP checkout, enacted: the agents `strabo demo` runs.

``platform_agent`` and ``business_proxy`` enact SimpleUCP (the Strabo paper's
Listings 4-6); ``incremental_platform`` and ``incremental_proxy`` enact
IncrementalUCP. The Business proxies bridge to a UCP merchant's REST API through
``strabo.proxy``. They are short on purpose: copy one to start an agent of your
own (docs/proxy.md walks through them).
"""
