from tests.helpers.browser import browser as browser  # the session's Chromium (test_webapp_*)
