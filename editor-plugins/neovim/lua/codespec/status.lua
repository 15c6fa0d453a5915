-- What the plugin shows about itself: its state, the status line text, the stats table.

local client = require("codespec.client")
local config = require("codespec.config")

local M = {}

M.state = {
  status = "stopped", -- stopped | loading | ready | busy | disabled | error
  message = nil,
  remote_down = nil, -- why the daemon's remote engine is unreachable (`codespec/status`)
  model = nil, -- the model the daemon runs (`codespec/status`), once it has loaded
  last_latency_ms = nil,
  tokens_per_pass = nil, -- the daemon's, asked at most every 5 s after a completion
  stats_asked = nil, -- vim.loop.now() of the last ask
}

function M.notify(message, level)
  vim.notify("codespec: " .. message, level or vim.log.levels.INFO)
end

--- Change the status, and tell statuslines (the `User CodespecStatus` autocommand).
function M.set(status, message)
  M.state.status = status
  M.state.message = message
  pcall(vim.api.nvim_exec_autocmds, "User", { pattern = "CodespecStatus" })
end

--- The daemon's engine changed state (`codespec/status`): the model it runs, a switch to
--- another, a remote server that became unreachable or reachable again.
function M.engine(params)
  if type(params.model) == "string" then
    M.state.model = params.model
  end
  if params.state == "switching" then
    M.set("loading", params.message)
    return
  end
  if params.state == "ready" and params.model and M.state.status == "loading" then
    M.set("ready") -- the model has loaded (after a switch, no progress may come)
  end
  if params.state == "remote unreachable" then
    M.state.remote_down = params.message or ""
  else
    M.state.remote_down = nil
  end
  pcall(vim.api.nvim_exec_autocmds, "User", { pattern = "CodespecStatus" })
end

function M.text()
  local s = M.state
  local text = "codespec: " .. s.status
  local off_here = s.status == "ready" and not config.enabled_in(vim.api.nvim_get_current_buf())
  if not config.options.enabled or off_here then
    text = "codespec: disabled"
  elseif s.remote_down and (s.status == "ready" or s.status == "busy") then
    text = "codespec: remote unreachable"
    if s.remote_down ~= "" then
      text = text .. " (" .. s.remote_down .. ")"
    end
  end
  if s.message then
    text = text .. " (" .. s.message .. ")"
  end
  if s.model then
    text = text .. ", model " .. s.model
  end
  if s.last_latency_ms then
    text = text .. string.format(", last %.0f ms", s.last_latency_ms)
  end
  if s.tokens_per_pass then
    text = text .. string.format(", %.2f tokens per target pass", s.tokens_per_pass)
  end
  if client.command then
    text = text .. ", server " .. client.command[1]
  end
  return text
end

--- A completion took ``ms``: remember it, and ask for the daemon's tokens per target pass
--- (`codespec/stats`), at most every 5 s.
function M.completed(ms)
  local s, now = M.state, vim.loop.now()
  s.last_latency_ms = ms
  M.set("ready")
  if not client.get() or (s.stats_asked and now - s.stats_asked < 5000) then
    return
  end
  s.stats_asked = now
  client.request("codespec/stats", { since = "30m" }, function(err, result)
    local tpp = not err and result and result.daemon and result.daemon.tokens_per_pass
    if type(tpp) == "number" then
      s.tokens_per_pass = tpp
    else
      s.stats_asked = nil -- nothing counted yet: ask again after the next completion
    end
  end)
end

--- Switch the daemon to the model ``name``, or choose one of those it lists (`:CodespecModel`).
function M.choose_model(name)
  if not client.get() then
    return M.notify("not running", vim.log.levels.WARN)
  end
  local function switch(chosen)
    client.request("codespec/chooseModel", { name = chosen }, function(err)
      if err then
        return M.notify(err.message or "cannot switch", vim.log.levels.WARN)
      end
      M.set("loading", "switching to " .. chosen)
    end)
  end
  if name and name ~= "" then
    return switch(name)
  end
  client.request("codespec/models", vim.empty_dict(), function(err, result)
    if err or not result then
      return M.notify("cannot list models: " .. (err and err.message or "no result"), vim.log.levels.WARN)
    end
    local names = {}
    for _, row in ipairs(result.models or {}) do
      if row.error == nil then
        table.insert(names, row.name)
      end
    end
    vim.ui.select(names, { prompt = "codespec model" }, function(chosen)
      if chosen then
        switch(chosen)
      end
    end)
  end)
end

--- The acceptance table by language (`:CodespecStats`); ``callback(err, result)`` instead.
function M.stats(callback)
  if not client.get() then
    M.notify("not running", vim.log.levels.WARN)
    return
  end
  client.request("codespec/stats", {}, function(err, result)
    if callback then
      return callback(err, result)
    end
    if err or not result then
      return M.notify("stats failed: " .. (err and err.message or "no result"), vim.log.levels.WARN)
    end
    local lines = { "language    shown  accepted  partial  tok/pass" }
    for _, g in ipairs(result.groups or {}) do
      local rate = g.acceptance_rate ~= vim.NIL and g.acceptance_rate or 0
      local tpp = g.tokens_per_pass ~= vim.NIL and g.tokens_per_pass or 0
      local row = string.format("%-10s %6d %8.0f%% %8d %9.2f", g.key, g.shown, 100 * rate, g.partial, tpp)
      table.insert(lines, row)
    end
    if #lines == 1 then
      table.insert(lines, "(nothing recorded yet)")
    end
    vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
  end)
end

return M
