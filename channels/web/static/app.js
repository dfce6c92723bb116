// The web app's own script (no inline script anywhere: the CSP forbids it).
"use strict";
