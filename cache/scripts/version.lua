-- Prepended to every script that orders versions. Versions are int64 and
-- travel as decimal strings; Lua numbers are doubles, exact only up to 2^53,
-- so versions are never converted: vcmp orders two canonical decimal
-- strings (as Go's strconv.FormatInt writes them) by sign, length, then
-- bytes. It returns -1, 0 or 1.
local function vcmp(a, b)
  local na, nb = string.byte(a, 1) == 45, string.byte(b, 1) == 45 -- '-'
  if na ~= nb then
    if na then return -1 end
    return 1
  end
  local r = 0
  if #a ~= #b then
    r = (#a < #b) and -1 or 1
  elseif a ~= b then
    r = (a < b) and -1 or 1
  end
  if na then return -r end
  return r
end
