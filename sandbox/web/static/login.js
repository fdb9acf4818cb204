"use strict";
// The sign-in page: say so when the last try failed (the server redirects with ?failed=1).
if (new URLSearchParams(location.search).has("failed")) {
  document.getElementById("failed").hidden = false;
}
