"""REINFORCE with a Categorical policy (as PyTorch's reinforcement_learning example) on a
tiny generated environment: a corridor of 6 cells (a wall left of cell 0); the agent
starts in cell 0, pays 0.05 per step and is paid 1 for reaching cell 5 within 20 steps."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

N_CELLS, START, GOAL, HORIZON = 6, 0, 5, 20
gamma = 0.95
eps = np.finfo(np.float32).eps.item()


class Corridor:
    def reset(self):
        self.pos, self.t = START, 0
        return self._obs()

    def _obs(self):
        obs = np.zeros(N_CELLS, dtype=np.float32)
        obs[self.pos] = 1.0
        return obs

    def step(self, action):
        self.pos = max(self.pos + (1 if action == 1 else -1), 0)
        self.t += 1
        if self.pos == GOAL:
            return self._obs(), 1.0, True
        return self._obs(), -0.05, self.t >= HORIZON


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(N_CELLS, 32)
        self.affine2 = nn.Linear(32, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        return F.softmax(self.affine2(x), dim=1)


def select_action(policy, state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode(policy, optimizer):
    R = 0
    policy_loss = []
    returns = []
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps) if len(returns) > 1 else returns
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]


def main():
    torch.manual_seed(543)
    env = Corridor()
    policy = Policy()
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    running = 0.0
    for i_episode in range(1, 121):
        state = env.reset()
        ep_reward = 0
        for t in range(HORIZON):
            action = select_action(policy, state)
            state, reward, done = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running = 0.05 * ep_reward + 0.95 * running
        finish_episode(policy, optimizer)
    # the greedy policy after training: steps to the goal from the start
    with torch.no_grad():
        state, steps, done, reward = env.reset(), 0, False, 0.0
        while not done:
            probs = policy(torch.from_numpy(state).unsqueeze(0))
            state, reward, done = env.step(int(probs.argmax(dim=1).item()))
            steps += 1
    print(f"running reward {running:.3f}, greedy: {steps} steps, reward {reward}")
    return {"running_reward": running, "greedy_steps": steps, "greedy_reward": reward}
